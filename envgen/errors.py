"""Every error envgen raises to its caller, in one hierarchy with catchable categories.

    EnvgenError                 the root: catch it to handle anything envgen reports
    ├── InputError              caused by input: a flag, a config, a file, a reference; fix the input
    │   ├── PackError           a pack that does not load (names file, line and field)
    │   └── ActionError         a model's message that cannot be read as text plus tool calls
    ├── SandboxError            a sandbox that could not start or died beyond recovery
    ├── BuildError              a build step that could not finish (image, repository setup, LLM pipeline)
    │   ├── EnvironmentFailed   a code repository's install step failed
    │   └── SynthesisError      an LLM pipeline stopped (resumable)
    │       └── SearchSynthesisError
    ├── ServiceError            an external service failed or is unreachable; retrying later may help
    │   ├── LLMError            a chat endpoint refused the request
    │   │   ├── LLMUnavailable  the endpoint kept failing until the retry budget ran out
    │   │   └── ContextTooLong  the request does not fit the model's context window
    │   ├── GitHubError         the GitHub REST API
    │   ├── HubError            the Hugging Face Hub
    │   └── SearchUnavailable   a search backend
    └── JudgeError              a rubric judge gave no usable judgement (never turned into a score)

Each class carries ``category`` (the word the CLI prints before the message, one line) and ``exit_code``.
Control-flow signals internal to one module (a generator skipping a candidate, a parser retry) are not
errors of this hierarchy; tests/test_errors.py lists them. Code that runs inside a sandbox never imports
this module.
"""


class EnvgenError(Exception):
    """Anything envgen reports to its caller; the message names what failed and, where it can, the fix."""

    category = "error"
    exit_code = 1
    llm_usage: dict | None = None
    """What a failed LLM build spent before it stopped (``session`` usage, ``transcripts``), for the CLI's table."""


class InputError(EnvgenError):
    """Caused by input (a flag, a config, a file, a reference): the message names the input and the fix."""

    exit_code = 2


class ImportSourceError(InputError):
    """An existing suite given to ``envgen import`` (a checkout, a domain, a file in it) cannot be imported; the
    message names the file and what to fetch or fix."""


class PackError(InputError):
    """A pack that does not load: the message names the file, the line (where there is one) and the field."""


class ActionError(InputError):
    """An assistant message that cannot be read as text plus tool calls; the message is for the model.

    ``code`` names the failure for counters and logs: ``malformed_json`` (a call's JSON does not parse),
    ``bad_tool_call`` (it parses but is not a call: no name, arguments not an object, ...),
    ``bad_message`` (an OpenAI message with wrong field types), ``unsupported_action`` (not text or JSON).
    """

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


class SandboxError(EnvgenError):
    """A sandbox that could not start or that died in a way the episode cannot recover from."""

    category = "sandbox error"


class BuildError(EnvgenError):
    """A build step that could not finish: an image build, a repository's setup, an LLM pipeline stage."""

    category = "build error"


class EnvironmentFailed(BuildError):
    """An install step failed: ``steps`` says which, with its exit code, and ``tail`` the build's last output."""

    def __init__(self, message: str, steps: list, tail: str = ""):
        super().__init__(message)
        self.steps, self.tail = steps, tail


class SynthesisError(BuildError):
    """An LLM pipeline cannot go on (an endpoint down, an agent that never produced a usable env); rerun to resume."""


class SearchSynthesisError(SynthesisError):
    """The search pipeline cannot go on (an endpoint down, a corpus without entities)."""


class ServiceError(EnvgenError):
    """An external service (an LLM endpoint, GitHub, the Hub, a search provider) failed or is unreachable."""

    category = "service error"


class LLMError(ServiceError):
    """A chat request that cannot succeed as sent (bad request, auth, unknown model): retrying will not help."""


class LLMUnavailable(LLMError):
    """The endpoint kept failing (429/5xx/timeouts/connection) until the retry budget ran out."""


class ContextTooLong(LLMError):
    """The endpoint refused the request because it does not fit the model's context window (a 400 saying so).

    An agent trims old tool results and retries once (``envgen.llm.agent``); elsewhere it is an LLMError."""


class GitHubError(ServiceError):
    """The GitHub REST API failed, refused the request or ran out of rate limit."""


class HubError(ServiceError):
    """The Hugging Face Hub is unreachable or answered with an error a user cannot fix by changing input."""


class SearchUnavailable(ServiceError):
    """A search backend cannot answer (offline, missing extra, provider error); the message is for the agent."""


class JudgeError(EnvgenError):
    """A rubric judge gave no usable judgement after its attempts: the task is not scored, never 0 or 1."""

    category = "judge error"
