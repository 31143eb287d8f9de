"""Building packs: the ``Family`` interface and registry (``family``), the SDK category generators use
(``sdk``), the red-team gate (``gate``), the offline build (``offline``) and the LLM-pipeline runner
(``pipeline``)."""
