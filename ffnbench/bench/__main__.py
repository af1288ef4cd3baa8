"""`python -m ffnbench.bench`: the command line is ffnbench.bench.cli."""

from ffnbench.bench.cli import main

if __name__ == "__main__":
    main()
