"""`python -m benchmarks NAME [OPTIONS]`: see benchmarks/__init__.py."""

from benchmarks import main

if __name__ == "__main__":
    raise SystemExit(main())
