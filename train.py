"""Train a ViT with a chosen position scheme: `python train.py --pos rope2d` (see --help)."""

from vitpos.training import main

if __name__ == "__main__":
    raise SystemExit(main())
