"""Importers of existing suites (``envgen import SOURCE``): each turns a suite a user already has into a pack,
with no hand edits. ``tau2``: a domain of a tau2-bench checkout (``envgen.importers.tau2``)."""
