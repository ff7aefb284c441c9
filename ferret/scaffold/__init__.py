"""`ferret new <op>`: a new op's files, from a working example (ferret/scaffold/new_op.py)."""
