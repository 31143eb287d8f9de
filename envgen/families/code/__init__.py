"""Repository tasks from issue/PR pairs, local git history or SWE-bench files, verified by fail-to-pass tests.

``build_code(source, out)`` mines ``github:OWNER/REPO``, ``git:PATH`` or ``swebench:FILE`` into one
pack per validated task; ``export_swebench(pack_or_folder, out)`` writes SWE-bench JSONL back.
Language-specific parts live behind ``lang.Language`` (Python: ``python.Python``); ``languages`` lists them.
"""

from .pipeline import build_code
from .candidates import Candidate, Filters, Rejection, make_candidate, split_patch
from .lang import Language, Recipe, RepoView
from .languages import detect_language, get_language
from .packs import code_packs, export_swebench
from .sources import GitHub, GitHubSource, LocalGitSource, RawInstance, SWEBenchSource, open_source, read_swebench
from .execution import Validation, classify, validate_instance
from .family import FAMILY

__all__ = ["FAMILY", "build_code", "export_swebench", "code_packs", "Candidate", "Filters", "Rejection",
           "make_candidate", "split_patch", "Language", "Recipe", "RepoView", "detect_language", "get_language",
           "GitHub", "GitHubSource", "LocalGitSource", "RawInstance", "SWEBenchSource", "open_source",
           "read_swebench", "Validation", "classify", "validate_instance"]
