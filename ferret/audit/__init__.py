"""`ferret gate audit`: a gate's strength measured by mutation testing (`ferret.audit.run.run_audit`)."""
