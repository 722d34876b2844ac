"""The flow definition: the documented JSON graph of an agent (see docs/flows.md).

Structural rules (types, lengths, formats) live in these models; graph rules (reachability, targets,
tools, expressions, templates, loops) in :mod:`parley.flows.validation`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from parley.kit.schemas import E164Target as E164

NodeId = Annotated[str, Field(pattern=r"^[A-Za-z][A-Za-z0-9_-]{0,63}$", examples=["ask_order"])]
VariableName = Annotated[str, Field(pattern=r"^[A-Za-z][A-Za-z0-9_]{0,63}$", examples=["order_number"])]
Template = Annotated[str, Field(max_length=4000, description="Jinja2 template rendered in a sandbox.")]
Expression = Annotated[
    str, Field(min_length=1, max_length=1000, description="Expression over the flow's variables.")
]

# Variables every session has, whether the flow declares them or not.
BUILTIN_VARIABLES = frozenset(
    {
        "caller_number",
        "called_number",
        "session_id",
        "channel",
        "language",
        "now",
        "today",
        "last_user_message",
    }
)


class DefinitionModel(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=False)


class SpeechSettings(DefinitionModel):
    provider: str = Field(min_length=1, max_length=60, description="Provider key, e.g. 'espeak'.")
    voice: str | None = Field(default=None, max_length=120)
    model: str | None = Field(default=None, max_length=120)


class TurnTaking(DefinitionModel):
    """How a live call takes turns and fills silences (docs/flows.md, "Voice: turn-taking")."""

    hangover_ms: int = Field(
        default=600, ge=100, le=3000, description="Silence after the caller's speech that ends a turn."
    )
    short_hangover_ms: int = Field(
        default=220,
        ge=100,
        le=3000,
        description="The silence that ends a turn once a collect node's answer is complete.",
    )
    barge_in_min_ms: int = Field(
        default=300, ge=60, le=3000, description="Caller speech needed to interrupt the agent."
    )
    barge_in_min_words: int = Field(
        default=1, ge=0, le=10, description="Words an interruption must hold; fewer and the agent resumes."
    )
    filler_after_ms: int = Field(
        default=1500, ge=0, le=30000, description="A turn slower than this gets a filler line; 0: never."
    )
    reprompt_after_ms: int = Field(
        default=6000, ge=0, le=120000, description="Caller silence before a re-prompt; 0: never."
    )
    max_reprompts: int = Field(
        default=2, ge=0, le=10, description="Re-prompts before the call ends as 'caller_silent'."
    )


class VoiceSettings(DefinitionModel):
    stt: SpeechSettings | None = None
    tts: SpeechSettings | None = None
    turn_taking: TurnTaking = Field(default_factory=TurnTaking)


class _Node(DefinitionModel):
    id: NodeId
    label: str | None = Field(default=None, max_length=200)


class SayNode(_Node):
    type: Literal["say"]
    text: Template
    next: NodeId | None = None


class CollectNode(_Node):
    type: Literal["collect"]
    variable: VariableName
    kind: Literal["number", "digits", "date", "yes_no", "choice", "regex", "free_text"] = "free_text"
    prompt: Template
    reprompt: Template | None = None
    choices: list[Annotated[str, Field(min_length=1, max_length=200)]] | None = Field(
        default=None, max_length=50, description="Allowed answers for kind 'choice'."
    )
    pattern: str | None = Field(
        default=None, max_length=500, description="Regular expression for kind 'regex'."
    )
    min_length: int | None = Field(default=None, ge=0, le=100, description="For 'digits': fewest digits.")
    max_length: int | None = Field(default=None, ge=1, le=100, description="For 'digits': most digits.")
    max_retries: int = Field(default=2, ge=0, le=10)
    on_failure: NodeId | None = Field(default=None, description="Where to go when the retries run out.")
    next: NodeId | None = None
    # voice: this node's endpointing, over the flow's voice.turn_taking
    hangover_ms: int | None = Field(
        default=None, ge=100, le=3000, description="Voice: the silence that ends the caller's answer."
    )
    short_hangover_ms: int | None = Field(
        default=None, ge=100, le=3000, description="Voice: the silence once the answer is complete."
    )


class ToolNode(_Node):
    type: Literal["tool"]
    tool: str = Field(
        min_length=1, max_length=80, description="Name or id of one of the organization's tools."
    )
    arguments: dict[VariableName, Any] = Field(
        default_factory=dict, description="Argument values; strings are templates."
    )
    result_variable: VariableName | None = None
    on_error: NodeId | None = None
    next: NodeId | None = None


class Condition(DefinitionModel):
    when: Expression
    next: NodeId


class BranchNode(_Node):
    type: Literal["branch"]
    conditions: list[Condition] = Field(min_length=1, max_length=50)
    default: NodeId


class Transition(DefinitionModel):
    name: VariableName
    description: str = Field(default="", max_length=500)
    next: NodeId


class LlmNode(_Node):
    type: Literal["llm"]
    system_prompt: Template = ""
    tools: list[str] = Field(default_factory=list, max_length=20, description="Names or ids of tools.")
    transitions: list[Transition] = Field(default_factory=list, max_length=20)
    max_turns: int = Field(default=10, ge=1, le=100)
    next: NodeId | None = Field(default=None, description="Where to go after max_turns.")


class KnowledgeNode(_Node):
    type: Literal["knowledge"]
    document_ids: list[Annotated[str, Field(max_length=40)]] | None = Field(
        default=None,
        max_length=100,
        description="Subset of documents; all of the organization's when omitted.",
    )
    query: Template = Field(default="{{ last_user_message }}", description="What to search for.")
    top_k: int = Field(default=3, ge=1, le=10)
    answer: Template = Field(default="{{ knowledge_answer }}", description="What to say; sees 'hits'.")
    min_relevance: float = Field(
        default=0.5,
        ge=0,
        le=1,
        description="Share of the question's words (stop words aside) a chunk must contain, in the "
        "agent's language, to count as an answer.",
    )
    not_found: Template = Field(
        default="",
        description="What to say when no chunk is relevant (default: a sentence in the agent's language).",
    )
    result_variable: VariableName | None = None
    next: NodeId | None = None


class TransferNode(_Node):
    type: Literal["transfer"]
    phone_number: E164
    message: Template = ""
    next: NodeId | None = Field(default=None, description="Where to go when the transfer fails.")


class SetNode(_Node):
    type: Literal["set"]
    assignments: dict[VariableName, Expression] = Field(min_length=1, max_length=50)
    next: NodeId | None = None


class SignalNode(_Node):
    type: Literal["signal"]
    signal_type: str = Field(pattern=r"^[a-z][a-z0-9_]{0,63}$", examples=["callback_requested"])
    severity: Literal["info", "low", "medium", "high", "critical"] = "info"
    details: dict[VariableName, Any] = Field(
        default_factory=dict, description="Values; strings are templates."
    )
    next: NodeId | None = None


class EndNode(_Node):
    type: Literal["end"]
    text: Template = ""


Node = Annotated[
    SayNode
    | CollectNode
    | ToolNode
    | BranchNode
    | LlmNode
    | KnowledgeNode
    | TransferNode
    | SetNode
    | SignalNode
    | EndNode,
    Field(discriminator="type"),
]


AnalysisFieldType = Literal["bool", "str", "int", "number", "enum"]


class AnalysisField(DefinitionModel):
    """One value to extract from a finished call (docs/flows.md, "Post-call analysis")."""

    type: AnalysisFieldType
    description: str = Field(
        default="", max_length=500, description="What the value means (the model reads it)."
    )
    values: list[Annotated[str, Field(min_length=1, max_length=100)]] | None = Field(
        default=None, max_length=50, description="For 'enum': the allowed values."
    )
    variable: VariableName | None = Field(
        default=None, description="The flow variable that holds the value; default: the field's own name."
    )


class AnalysisSettings(DefinitionModel):
    """What to work out after each call: a summary, and fields extracted into a declared schema."""

    summary: bool = Field(default=True, description="Write a summary of the call.")
    fields: dict[VariableName, AnalysisField] = Field(default_factory=dict, max_length=50)


class FlowDefinition(DefinitionModel):
    language: str = Field(default="de", pattern=r"^[a-z]{2}(-[A-Z]{2})?$")
    languages: list[Annotated[str, Field(pattern=r"^[a-z]{2}(-[A-Z]{2})?$")]] = Field(
        default_factory=list, max_length=10, description="Further languages the agent may switch to."
    )
    voice: VoiceSettings = Field(default_factory=VoiceSettings)
    prompt: Template = Field(default="", description="Global instructions for every llm node.")
    variables: dict[VariableName, Any] = Field(default_factory=dict, description="Name → default value.")
    start_node: NodeId
    nodes: list[Node] = Field(min_length=1, max_length=500)
    analysis: AnalysisSettings | None = Field(
        default=None, description="Post-call analysis: a summary and extracted fields (optional)."
    )


# Which fields of a node name its successors, and what kind of edge each makes.
def node_targets(node: Any) -> list[tuple[str, str, str]]:
    """``(field, target, kind)`` for every successor a node names."""
    out: list[tuple[str, str, str]] = []
    if isinstance(node, BranchNode):
        out += [(f"conditions.{i}.next", c.next, "condition") for i, c in enumerate(node.conditions)]
        out.append(("default", node.default, "next"))
        return out
    if isinstance(node, LlmNode):
        out += [(f"transitions.{i}.next", t.next, "transition") for i, t in enumerate(node.transitions)]
    if isinstance(node, CollectNode) and node.on_failure:
        out.append(("on_failure", node.on_failure, "on_failure"))
    if isinstance(node, ToolNode) and node.on_error:
        out.append(("on_error", node.on_error, "on_error"))
    target = getattr(node, "next", None)
    if target:
        out.append(("next", target, "next"))
    return out


def assigned_variables(node: Any) -> set[str]:
    if isinstance(node, CollectNode):
        return {node.variable}
    if isinstance(node, ToolNode | KnowledgeNode) and node.result_variable:
        return {node.result_variable}
    if isinstance(node, SetNode):
        return set(node.assignments)
    return set()
