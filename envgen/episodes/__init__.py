"""Episodes: one task run in a sandbox (``episode``), parsing and rendering model actions (``actions``) and
the Gymnasium env ``envgen/Pack-v0`` (``gym``)."""
