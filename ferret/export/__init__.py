"""`ferret export`: an accepted kernel as a package that registers it with torch.library (ferret/export/export.py)."""
