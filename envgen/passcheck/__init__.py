"""The pass check: keep rules and the scheduler (``rules``), where rollouts run (``executors``), the
``envgen check`` / ``envgen eval`` commands (``check``) and the rollout ledger (``ledger``)."""
