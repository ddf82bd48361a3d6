"""SIPREC (RFC 7866) recording sessions: which participant each labelled stream carries.

Pure. A SIPREC INVITE (``Require: siprec``) carries a ``multipart/mixed`` body (RFC 2046) with
the SDP offer and the recording metadata (``application/rs-metadata+xml``, RFC 7865). Each
``m=`` line of the SDP names its stream with ``a=label:`` (RFC 4574); the metadata ties that
label to a ``<stream>``, the stream to the participant that sends it
(``<participantstreamassoc><send>``, or ``<send>`` inside ``<participant>`` as early drafts and
some recorders still write it) and the participant to its ``<nameID aor=…>``.

``map_streams`` follows those links and only those: a stream's channel never depends on the
order of the ``m=`` lines, of the metadata's elements, or of packets. ``AgentRule`` decides
which participant is the agent (its streams become channel ``agent``, every other's
``customer``); exactly one sending participant must match it.
"""

from __future__ import annotations

import fnmatch
import xml.etree.ElementTree as ElementTree
from collections.abc import Iterable
from dataclasses import dataclass

from pipeline.ingress.rtp import Rejected, RejectReason
from pipeline.ingress.sdp import MediaDescription

__all__ = [
    "METADATA_CONTENT_TYPE",
    "AgentRule",
    "BodyPart",
    "Participant",
    "RecordingMetadata",
    "StreamAssignment",
    "map_streams",
    "parse_metadata",
    "split_multipart",
]

METADATA_CONTENT_TYPE = "application/rs-metadata+xml"
AGENT_CHANNEL = "agent"
CUSTOMER_CHANNEL = "customer"


@dataclass(frozen=True, slots=True)
class BodyPart:
    content_type: str
    """Lowercased, without parameters."""
    body: bytes


def split_multipart(content_type_header: str, body: bytes) -> list[BodyPart] | Rejected:
    """The parts of a ``multipart/mixed`` body (RFC 2046 §5.1.1) by its ``boundary``."""
    boundary = ""
    for parameter in content_type_header.split(";")[1:]:
        name, _, value = parameter.partition("=")
        if name.strip().lower() == "boundary":
            boundary = value.strip().strip('"')
    if not boundary:
        return Rejected(RejectReason.BAD_SIP, "multipart body without a boundary")
    delimiter = b"--" + boundary.encode()
    sections = body.split(delimiter)
    if len(sections) < 3:
        return Rejected(RejectReason.BAD_SIP, "multipart body without parts")
    parts: list[BodyPart] = []
    for section in sections[1:]:
        if section.startswith(b"--"):
            break  # the close delimiter
        section = section.removeprefix(b"\r\n").removeprefix(b"\n")
        head, separator, content = section.partition(b"\r\n\r\n")
        if not separator:
            head, separator, content = section.partition(b"\n\n")
        if not separator:
            continue
        content_type = "text/plain"  # RFC 2046 §5.1's default
        for line in head.decode("utf-8", "replace").splitlines():
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-type":
                content_type = value.split(";")[0].strip().lower()
        # The CRLF before the next delimiter belongs to the delimiter (RFC 2046 §5.1.1).
        if content.endswith(b"\r\n"):
            content = content[:-2]
        elif content.endswith(b"\n"):
            content = content[:-1]
        parts.append(BodyPart(content_type, content))
    return parts


@dataclass(frozen=True, slots=True)
class Participant:
    participant_id: str
    aor: str
    name: str


@dataclass(frozen=True, slots=True)
class RecordingMetadata:
    session_id: str
    participants: dict[str, Participant]
    """By participant_id."""
    stream_ids_by_label: dict[str, str]
    senders_by_stream_id: dict[str, tuple[str, ...]]
    """stream_id → the participant ids that send it."""


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def _children(element: ElementTree.Element, name: str) -> Iterable[ElementTree.Element]:
    return (child for child in element if _local(child.tag) == name)


def parse_metadata(body: bytes) -> RecordingMetadata | Rejected:
    """The RFC 7865 metadata in ``body``; ``siprec_bad_metadata`` when it is not such XML.

    A document type declaration is refused before parsing: the metadata needs none, and
    entity declarations are how XML from the network is made to blow up."""
    if b"<!doctype" in body.lower() or b"<!entity" in body.lower():
        return Rejected(RejectReason.SIPREC_BAD_METADATA, "a document type declaration")
    try:
        root = ElementTree.fromstring(body)
    except ElementTree.ParseError as error:
        return Rejected(RejectReason.SIPREC_BAD_METADATA, f"not XML: {error}")
    if _local(root.tag) != "recording":
        return Rejected(RejectReason.SIPREC_BAD_METADATA, f"root <{_local(root.tag)}>")
    participants: dict[str, Participant] = {}
    senders: dict[str, list[str]] = {}
    for element in _children(root, "participant"):
        participant_id = element.get("participant_id") or element.get("id") or ""
        name_id = next(iter(_children(element, "nameID")), None)
        aor = name_id.get("aor", "") if name_id is not None else element.get("aor", "")
        name_element = next(iter(_children(name_id, "name")), None) if name_id is not None else None
        name = (name_element.text or "").strip() if name_element is not None else ""
        if not participant_id:
            return Rejected(RejectReason.SIPREC_BAD_METADATA, "a participant without an id")
        participants[participant_id] = Participant(participant_id, aor, name)
        for send in _children(element, "send"):  # the draft-era form
            senders.setdefault((send.text or "").strip(), []).append(participant_id)
    labels: dict[str, str] = {}
    for element in _children(root, "stream"):
        stream_id = element.get("stream_id", "")
        label = next(iter(_children(element, "label")), None)
        if stream_id and label is not None and (label.text or "").strip():
            labels[(label.text or "").strip()] = stream_id
    for element in _children(root, "participantstreamassoc"):
        participant_id = element.get("participant_id", "")
        for send in _children(element, "send"):
            stream_senders = senders.setdefault((send.text or "").strip(), [])
            if participant_id not in stream_senders:
                stream_senders.append(participant_id)
    session = next(iter(_children(root, "session")), None)
    return RecordingMetadata(
        session.get("session_id", "") if session is not None else "",
        participants,
        labels,
        {stream_id: tuple(ids) for stream_id, ids in senders.items()},
    )


@dataclass(frozen=True, slots=True)
class AgentRule:
    """Which participant is the agent: any of ``alternatives`` matches, each ``(kind,
    pattern)`` with kind ``aor`` (a glob on the AOR, ``sip:*@agents.example.com``),
    ``domain`` (the AOR's host is the domain or below it) or ``name`` (a glob on the name);
    all case-insensitive. An empty rule matches nobody (SIPREC is then refused)."""

    alternatives: tuple[tuple[str, str], ...]

    KINDS = ("aor", "domain", "name")

    @classmethod
    def parse(cls, text: str) -> AgentRule:
        """``"domain:agents.example.com, aor:sip:supervisor@*"`` → a rule. Raises ValueError."""
        alternatives = []
        for part in text.split(","):
            if not part.strip():
                continue
            kind, colon, pattern = part.strip().partition(":")
            if not colon or kind.strip().lower() not in cls.KINDS or not pattern.strip():
                raise ValueError(f"{part.strip()!r} is not KIND:PATTERN with KIND in {cls.KINDS}")
            alternatives.append((kind.strip().lower(), pattern.strip().lower()))
        return cls(tuple(alternatives))

    @property
    def enabled(self) -> bool:
        return bool(self.alternatives)

    def is_agent(self, participant: Participant) -> bool:
        aor = participant.aor.lower()
        host = aor.split("@", 1)[1].split(";")[0].split(":")[0] if "@" in aor else ""
        for kind, pattern in self.alternatives:
            if kind == "aor" and fnmatch.fnmatchcase(aor, pattern):
                return True
            if kind == "domain" and (host == pattern or host.endswith("." + pattern)):
                return True
            if kind == "name" and fnmatch.fnmatchcase(participant.name.lower(), pattern):
                return True
        return False


@dataclass(frozen=True, slots=True)
class StreamAssignment:
    """One recorded stream: its ``m=`` line (index), label, channel and participant."""

    media_index: int
    label: str
    channel: str
    participant: Participant
    is_agent: bool


def map_streams(
    media: tuple[MediaDescription, ...],
    taken: list[int],
    metadata: RecordingMetadata,
    rule: AgentRule,
) -> list[StreamAssignment] | Rejected:
    """The channel of each taken ``m=`` line (indexes ``taken``), by label → stream →
    sending participant → agent rule. The agent's streams are ``agent``, the others'
    ``customer``; a second stream of the same side is ``agent-2`` (and so on), numbered in
    the order of their labels (never of the ``m=`` lines)."""
    resolved: list[tuple[int, str, Participant]] = []
    seen_labels: set[str] = set()
    for index in taken:
        label = media[index].label
        if not label or label in seen_labels:
            return Rejected(
                RejectReason.SIPREC_UNLABELLED_STREAM,
                f"m-line {index} has {'no label' if not label else f'label {label!r} twice'}",
            )
        seen_labels.add(label)
        stream_id = metadata.stream_ids_by_label.get(label)
        if stream_id is None:
            return Rejected(RejectReason.SIPREC_UNKNOWN_LABEL, f"label {label!r} not in metadata")
        senders = metadata.senders_by_stream_id.get(stream_id, ())
        if len(senders) != 1 or senders[0] not in metadata.participants:
            return Rejected(
                RejectReason.SIPREC_UNKNOWN_LABEL,
                f"stream of label {label!r} has {len(senders)} known senders, not 1",
            )
        resolved.append((index, label, metadata.participants[senders[0]]))
    agents = {p.participant_id for _, _, p in resolved if rule.is_agent(p)}
    if len(agents) != 1:
        return Rejected(
            RejectReason.SIPREC_AGENT_UNRESOLVED,
            f"{len(agents)} of the streams' participants match the agent rule, not 1",
        )
    assignments: list[StreamAssignment] = []
    counts: dict[str, int] = {}
    for index, label, participant in sorted(resolved, key=lambda item: _label_order(item[1])):
        is_agent = participant.participant_id in agents
        side = AGENT_CHANNEL if is_agent else CUSTOMER_CHANNEL
        counts[side] = counts.get(side, 0) + 1
        channel = side if counts[side] == 1 else f"{side}-{counts[side]}"
        assignments.append(StreamAssignment(index, label, channel, participant, is_agent))
    return sorted(assignments, key=lambda a: a.media_index)


def _label_order(label: str) -> tuple[int, int, str]:
    return (0, int(label), "") if label.isdigit() else (1, 0, label)
