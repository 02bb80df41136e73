"""``python -m prfaas_plan.cli``: the same command line as ``prfaas-plan``."""

from prfaas_plan.cli import main

if __name__ == "__main__":
    main()
