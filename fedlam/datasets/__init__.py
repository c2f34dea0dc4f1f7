"""Data files shipped with fedlam (see README.md in this folder for provenance)."""
