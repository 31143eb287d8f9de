"""Episodes: one task run in a sandbox (``episode``), parsing and rendering model actions (``actions``), the
messages an agent sees at the start (``prompt``) and the Gymnasium env ``envgen/Pack-v0`` (``gym``)."""
