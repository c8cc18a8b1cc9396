"""The planner: a request and a target to a frozen, validated plan (``make``), and a saved plan
checked against what its inputs plan now (``recheck``)."""
