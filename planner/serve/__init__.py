"""`planner serve`: the local web calculator (optional extra: pip install "planner[web]")."""
