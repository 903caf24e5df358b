"""The only places vitpos touches a library's private names: one module per library.

Each lists the names it uses (``PRIVATE``), which tests/test_compat.py checks against the installed version, so an
upgrade that removes one fails there first, with the name, instead of deep inside a run."""
