"""``python -m prfaas_plan.cli``: the same command line as ``prfaas-plan``."""

from prfaas_plan.cli import run

if __name__ == "__main__":
    run()
