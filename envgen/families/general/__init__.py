"""The general family: offline category generators (``envs/general/*``) and the LLM agent pipeline
(``pipeline``) that builds a database, tools and tasks for any category; ``static_checks`` vets the code
its agents write."""
