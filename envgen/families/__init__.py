"""The families ``envgen build`` makes, one folder each (host side): ``general``, ``search``, ``code``.

Each folder's ``__init__`` exposes ``FAMILY``, an instance of ``envgen.build.family.Family``; the CLI finds
them by listing this package, so a new family is a new folder.
"""
