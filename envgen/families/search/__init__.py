"""The search family: offline categories (``envs/search/*``) and the question-construction pipeline over a
mined corpus (``pipeline``)."""
