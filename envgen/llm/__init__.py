"""Language models: the OpenAI-compatible client with thinking retention (``client``), tool-using agents
(``agent``), the generator agents' role files (``roles``) and the rubric judge (``judge``)."""
