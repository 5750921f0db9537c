"""Phrases aimed at the model and requests for secrets or files: the rules and how text is
normalised and matched against them."""

from __future__ import annotations

import bisect
import dataclasses
import functools
import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from registry.servers.vetting.scanner.findings import _MATCHES_DETAILED, FindingKind, Severity, _Hit
from registry.servers.vetting.scanner.hidden_unicode import (
    _ASCII_HIDDEN,
    _WHITESPACE,
    _excerpt,
    _hidden_re,
    _render,
    _truncate,
)
from registry.servers.vetting.scanner.limits import PATTERN_SCAN_HEAD_CHARS, PATTERN_SCAN_TAIL_CHARS

# --- Phrases aimed at the model, and requests for secrets ----------------------------------------


@dataclass(frozen=True)
class _Rule:
    id: str
    kind: FindingKind
    severity: Severity
    label: str  # may name the matched `target` group as {target}
    regex: re.Pattern[str]
    # Cheap preconditions, so most strings never reach the regex: it cannot match unless one of
    # `words` (a token of the lowered text) or `needles` (a substring) occurs, and, if `requires`
    # is given, one of those substrings too.
    words: frozenset[str]
    needles: tuple[str, ...]
    requires: tuple[str, ...]
    on_words: bool  # match against the text with Markdown emphasis and underscores taken out
    in_keys: bool  # also applies to property names and tool names


def _gap(limit: int) -> str:
    # Up to `limit` characters within one clause. A dot before a non-space (".ssh", "mcp.json",
    # a URL) does not end it. Bounded and lazy, so a failed match costs at most `limit` steps.
    return rf"(?:[^.!?;\n]|[.!?;](?=\S)){{0,{limit}}}?"


_ENDINGS: Final = ("", "s", "ed", "ing")


def _forms(verbs: str) -> str:
    # The inflected words a `verb(?:s|ed|ing)?` pattern can match, for a rule's `words` gate.
    return "|".join(f"{verb}{ending}" for verb in verbs.split("|") for ending in _ENDINGS)


def _rule(
    id: str,
    kind: FindingKind,
    severity: Severity,
    label: str,
    pattern: str,
    *,
    words: str = "",
    needles: tuple[str, ...] = (),
    requires: tuple[str, ...] = (),
    on_words: bool = True,
    in_keys: bool = False,
) -> _Rule:
    return _Rule(
        id,
        kind,
        severity,
        label,
        re.compile(pattern, re.IGNORECASE),
        frozenset(words.split("|")) - {""},
        needles,
        requires,
        on_words,
        in_keys,
    )


_NEGATION: Final = r"(?:do\snot|don'?t|dont|never|must\snot|mustn'?t|should\snot|shouldn'?t)"
_PEOPLE_WORDS: Final = "user|users|human|humans|operator|operators"
_PEOPLE: Final = r"(?:the\s)?(?:users?|humans?|operators?)"

_SENSITIVE_PATH: Final = (
    r"(?P<target>~?/?\.ssh(?!\w)(?:/[\w.-]{1,64})?"
    r"|\bid_(?:rsa|dsa|ecdsa|ed25519)(?:\.pub)?\b"
    r"|\bauthorized_keys\b"
    r"|~?/?\.(?:npmrc|pypirc|netrc|pgpass|git-credentials|bash_history|zsh_history)\b"
    r"|~?/?\.aws/(?:credentials|config)\b"
    r"|~?/?\.kube/config\b"
    r"|~?/?\.docker/config\.json\b"
    r"|~?/?\.gnupg\b"
    r"|~?/?\.config/gcloud\b"
    r"|(?:~?/?\.cursor/)?\bmcp\.json\b"
    r"|\bclaude_desktop_config\.json\b"
    r"|/etc/(?:shadow|sudoers|passwd)\b"
    r"|\bwallet\.dat\b)"
)
_SENSITIVE_NEEDLES: Final = (
    ".ssh",
    "id_",
    "authorized_keys",
    ".npmrc",
    ".pypirc",
    ".netrc",
    ".pgpass",
    ".git-credentials",
    "_history",
    ".aws/",
    ".kube/",
    ".docker/",
    ".gnupg",
    "gcloud",
    "mcp.json",
    "claude_desktop_config",
    "/etc/",
    "wallet.dat",
)
# .env and .env.local, not `process.env`, `.envrc` or the .env.example that lists names only.
_ENV_FILE: Final = (
    r"(?P<target>(?<![\w.$])\.env(?!\.(?:example|sample|template|dist|defaults)\b)"
    r"(?:\.[\w-]{1,20})?\b)"
)
# Imperatives only: "read ~/.ssh/id_rsa" asks the model, "reads ~/.npmrc" describes the tool (and
# is left to the low-severity mention rule).
_REQUEST_VERBS: Final = (
    "read|cat|open|include|pass|send|attach|provide|paste|upload|copy|put|insert|append|load"
    "|grab|fetch|get|access|print|output|dump|collect|extract|share|forward|post|exfiltrate|leak"
    "|steal|embed"
)
_REQUEST_VERB: Final = r"\b(?:" + _REQUEST_VERBS + r")\b"
_CREDENTIAL_NOUN: Final = (
    r"\b(?:(?:private|secret|ssh|signing|gpg|pgp)[\s_-]?keys?"
    r"|api[\s_-]?(?:keys?|secrets?|tokens?)"
    r"|(?:access|auth|authentication|bearer|refresh|session|oauth|personal[\s_-]access|github"
    r"|gitlab|slack|npm|pypi|aws)[\s_-]?tokens?"
    r"|aws[\s_-]?(?:secret|access)[\s_-]?(?:access[\s_-])?keys?"
    r"|pass(?:words?|phrases?|wd)|credentials?|secrets?"
    r"|(?:session|auth)[\s_-]?cookies?|cookies"
    r"|(?:seed|recovery|mnemonic)[\s_-]?phrases?"
    r"|connection[\s_-]strings?|keychain)\b"
)
_CREDENTIAL_NEEDLES: Final = (
    "key",
    "token",
    "pass",
    "credential",
    "secret",
    "cookie",
    "phrase",
    "connection",
    "environment",
    "env",
    "keychain",
)
_ASKING_VERBS: Final = (
    "read|cat|dump|leak|extract|exfiltrate|steal|collect|harvest|gather|print|reveal|forward"
    "|send|upload|post|attach|paste|copy|output|echo|disclose|share|transmit|email|include|pass"
    "|provide|supply|give|insert|put|append|fetch|retrieve|grab|obtain|find|fill"
    "|populate|look"
)
# "look" stands for "look up"; "e-mail" is read as "mail".
_ASKING_VERB: Final = r"\b(?:" + _ASKING_VERBS + r"|mail)(?:s|ed|ing)?\b(?:\sup\b)?"
_OWNER: Final = (
    r"(?:your|the\suser'?s|users'?|user'?s|all|every|their|stored|saved|local|cached|my"
    r"|the\shost'?s|the\smachine'?s|the\ssystem'?s)"
)
_EXFIL_VERBS: Final = (
    "send|forward|post|upload|transmit|exfiltrate|leak|copy|bcc|cc|share|submit|mail|email"
    "|beacon|curl|wget"
)

_RULES: Final[tuple[_Rule, ...]] = (
    _rule(
        "ignore_instructions",
        "instructions_to_model",
        "high",
        "tells the model to ignore its instructions",
        r"\b(?:ignore|disregard|forget|override|bypass)\b"
        + _gap(15)
        + r"\b(?:previous|prior|preceding|above|earlier|former|original|system|your)\b"
        + _gap(20)
        + r"\b(?:instructions?|prompts?|directions|directives|guidelines|guardrails|rules"
        r"|policies)\b"
        r"|\b(?:ignore|disregard|forget)\s(?:everything|anything|all)\s(?:above|before"
        r"|previously|prior|else|you(?:'ve|\shave)?\s(?:were\s|been\s)?(?:told|given))",
        words="ignore|disregard|forget|override|bypass",
        in_keys=True,
    ),
    _rule(
        "model_tag",
        "instructions_to_model",
        "high",
        "an <IMPORTANT>/<SYSTEM>-style tag addressed to the model",
        r"<\s*/?\s*(?:important|system|instructions?|critical"
        r"|(?:system|ai|model|llm|assistant|agent|tool|secret|hidden|admin)[\s_-]?"
        r"(?:prompt|message|instructions?|note|directive)s?"
        r"|note[\s_-]to[\s_-](?:the[\s_-])?(?:ai|assistant|model|llm|agent))\b[^<>]{0,60}>",
        needles=("<",),
        on_words=False,
    ),
    _rule(
        "chat_template_token",
        "instructions_to_model",
        "high",
        "a chat-template control token",
        r"<\|[a-z_]{2,20}\|>|\[/?INST\]|<<\s*/?SYS\s*>>",
        needles=("<|", "[inst", "[/inst", "<<"),
        on_words=False,
    ),
    _rule(
        "bracket_directive",
        "instructions_to_model",
        "medium",
        "a bracketed [IMPORTANT]/[SYSTEM] directive",
        r"(?-i:\[\s*(?:IMPORTANT|SYSTEM|INSTRUCTIONS?|ADMIN|NOTE\sTO\s(?:THE\s)?"
        r"(?:AI|ASSISTANT|MODEL))\s*[:\]])",
        needles=("[",),
        on_words=False,
    ),
    _rule(
        "html_comment",
        "instructions_to_model",
        "medium",
        "an HTML comment, invisible when the text is rendered as Markdown",
        r"<!--\s*[^\s>]",
        needles=("<!--",),
        on_words=False,
    ),
    _rule(
        "conceal_from_user",
        "instructions_to_model",
        "high",
        "asks to keep something from the user",
        _NEGATION + r"\s(?:\w+,?\s){0,3}?(?:tell|inform|mention|reveal|disclose|notify|alert"
        r"|show|warn|explain)(?:ing)?\b" + _gap(40) + r"\b" + _PEOPLE + r"\b"
        r"|\bwithout\s(?:telling|informing|alerting|letting|(?:mentioning|revealing)(?:\sit)?"
        r"\sto)\s" + _PEOPLE + r"\b"
        r"|\b" + _PEOPLE + r"\s(?:must|should|shall|need|needs|will|may)\s?(?:not|n't|never)"
        r"\s(?:ever\s)?(?:know|see|notice|find\sout|learn|be\s(?:told|informed|aware|notified"
        r"|shown))\b"
        r"|\b(?:keep|hide|conceal)\s(?:this|it|that|these|them|the\s\w+)\s(?:\w+\s)?"
        r"(?:secret\s|hidden\s)?from\s" + _PEOPLE + r"\b",
        words=_PEOPLE_WORDS,
        in_keys=True,
    ),
    _rule(
        "stay_quiet",
        "instructions_to_model",
        "medium",
        "asks the model to keep quiet about something",
        r"\b(?:do\snot|don'?t|dont|never)\s(?:ever\s)?(?:mention|reveal|disclose|admit|say"
        r"|acknowledge)\s(?:that|this|it|anything|you|the\sfact)\b",
        words="mention|reveal|disclose|admit|say|acknowledge",
        in_keys=True,
    ),
    _rule(
        "before_using_tool",
        "instructions_to_model",
        "medium",
        "tells the model what to do before it uses the tool",
        r"\bbefore\s(?:using|calling|invoking|running|executing|you\s(?:use|call|invoke|run))"
        r"\s(?:this|the|any|these|that)\s(?:\w+\s)?(?:tools?|functions?)\b"
        + _gap(30)
        + r"\b(?:read|call|send|fetch|open|cat|load|include|pass|run|invoke|upload|collect"
        r"|gather|access|look\sup|obtain|retrieve)\b",
        words="before",
    ),
    _rule(
        "directive_to_assistant",
        "instructions_to_model",
        "medium",
        "orders the assistant to always, never or first do something",
        r"\byou\s(?:must|are\srequired\sto|are\sinstructed\sto|have\sbeen\sinstructed\sto)"
        r"\s(?:always|never|first|immediately|now|secretly|silently|quietly|ignore|instead"
        r"|also)\b"
        r"|\byou\s(?:should|need\sto|have\sto)\s(?:secretly|silently|quietly|ignore)\b"
        r"|\b(?:the\s)?(?:assistant|ai|model|llm|agent|claude|chatgpt|gpt)\s(?:must|should"
        r"|shall|needs\sto|has\sto|is\srequired\sto)\s(?:always|never|first|immediately"
        r"|secretly|silently|quietly|ignore)\b"
        r"|\b(?:always|only)\s(?:use|call|prefer|choose|invoke)\s(?:this|the\s\w+)\s"
        r"(?:tool|function)\b" + _gap(20) + r"\b(?:instead\sof|rather\sthan|over\sany"
        r"|before\sany)\b",
        words="must|required|instructed|should|need|have|shall|needs|has|always|only",
    ),
    _rule(
        "prompt_leak",
        "instructions_to_model",
        "high",
        "asks the model to disclose its prompt or conversation",
        r"\b(?:reveal|print|show|repeat|output|include|send|leak|copy|dump|disclose|share"
        r"|paste|pass|write|fill|populate|put|insert|append|attach|provide|give|supply)\b"
        + _gap(60)
        + r"\byour\s(?:\w+\s)?(?:system\s?prompt|system\smessage|instructions|initial\sprompt"
        r"|hidden\sprompt|prompt|context\swindow|conversation(?:\shistory)?|chat\shistory)\b",
        words="your",
        in_keys=True,
    ),
    _rule(
        "system_prompt",
        "instructions_to_model",
        "low",
        "refers to the model's system prompt",
        # "the/your system prompt", not a parameter titled "System Prompt" in an LLM tool.
        r"\b(?:the|your|its|my|this)\s(?:\w+\s)?system\s?(?:prompts?|messages?)\b",
        words="system|systemprompt|systemprompts|systemmessage|systemmessages",
    ),
    _rule(
        "as_an_ai",
        "instructions_to_model",
        "medium",
        "addresses the model as an AI",
        r"\bas\san?\s(?:ai|artificial\sintelligence|llm|large\slanguage\smodel|language\smodel)\b"
        r"|\byou\sare\s(?:now\s)?(?:an?\s)?(?:ai|llm|large\slanguage\smodel|language\smodel"
        r"|ai\sassistant)\b",
        words="ai|intelligence|llm|model|assistant",
    ),
    _rule(
        "exfiltration_url",
        "instructions_to_model",
        "medium",
        "asks to send data to {target}",
        r"\b(?:send|forward|post|upload|transmit|exfiltrate|leak|copy|bcc|cc|share|submit"
        r"|e-?mail|beacon|curl|wget)(?:s|ed|ing)?\b"
        + _gap(80)
        + r"\b(?:to|into|via)\s(?:\S{1,30}\s){0,2}?"
        r"(?P<target>(?:https?|ftp)://[^\s\"'<>)\]]{0,199}[^\s\"'<>)\].,;:!?]"
        r"|[\w.+-]{1,64}@[\w-]{1,63}(?:\.[\w-]{1,63})+|\d{1,3}(?:\.\d{1,3}){3})",
        words=_forms(_EXFIL_VERBS),
        on_words=False,
    ),
    _rule(
        "exfiltration_host",
        "instructions_to_model",
        "high",
        "names a known data-collection endpoint ({target})",
        r"(?P<target>\b(?:webhook\.site|requestbin\.(?:com|net)|[\w-]+\.m\.pipedream\.net"
        r"|pipedream\.net|[\w-]+\.ngrok(?:-free)?\.(?:io|app|dev)|interact\.sh"
        r"|[\w-]+\.oast\.(?:fun|pro|live|site|online|me)|burpcollaborator\.net|oastify\.com"
        r"|requestcatcher\.com|hookbin\.com|beeceptor\.com|canarytokens\.com)\b)",
        words="webhook|requestbin|pipedream|ngrok|interact|oast|burpcollaborator|oastify"
        "|requestcatcher|hookbin|beeceptor|canarytokens",
        on_words=False,
    ),
    _rule(
        "covert_copy",
        "instructions_to_model",
        "high",
        "asks to quietly copy messages or data to someone else",
        r"\b(?:always|also|secretly|silently|quietly)\s(?:\w+\s)?(?:bcc|cc|forward|send\sa\scopy)"
        r"\b",
        words="always|also|secretly|silently|quietly",
        on_words=False,
    ),
    _rule(
        "sensitive_file_request",
        "secret_or_file_request",
        "high",
        "asks to read or pass on {target}",
        _REQUEST_VERB + _gap(60) + _SENSITIVE_PATH,
        words=_REQUEST_VERBS,
        requires=_SENSITIVE_NEEDLES,
        on_words=False,
    ),
    _rule(
        "env_file_request",
        "secret_or_file_request",
        "medium",
        "asks to read or pass on {target}",
        _REQUEST_VERB + _gap(60) + _ENV_FILE,
        words=_REQUEST_VERBS,
        requires=(".env",),
        on_words=False,
    ),
    _rule(
        "secret_request",
        "secret_or_file_request",
        "medium",
        "asks for {target}",
        _ASKING_VERB
        + _gap(40)
        + r"\b"
        + _OWNER
        + r"\s(?:[\w-]+\s){0,2}?(?P<target>"
        + _CREDENTIAL_NOUN
        + r")|"
        + _ASKING_VERB
        + _gap(30)
        + r"\b(?:contents?|value|values)\sof\s(?:the\s|your\s|all\s|any\s)?(?:[\w-]+\s){0,2}?"
        r"(?P<target2>" + _CREDENTIAL_NOUN + r")"
        # Environment variables hold secrets, but tools describe showing them (a debug tool):
        # only sending them somewhere counts.
        r"|\b(?:send|forward|upload|post|include|pass|attach|paste|leak|exfiltrate|share"
        r"|transmit)\b" + _gap(40) + r"\b(?:all|every|your|the\suser'?s)\s(?:\w+\s)?"
        r"(?P<target3>environment\svariables|env\svars)\b",
        words=_forms(_ASKING_VERBS + "|mail"),
        requires=_CREDENTIAL_NEEDLES,
        on_words=False,
    ),
)
# Mentions of the most sensitive files, with no request around them, are worth a glance only.
_SENSITIVE_MENTION: Final = _rule(
    "sensitive_file_mention",
    "secret_or_file_request",
    "low",
    "mentions {target}",
    _SENSITIVE_PATH,
    needles=_SENSITIVE_NEEDLES,
    on_words=False,
)
_KEY_RULES: Final = tuple(rule for rule in _RULES if rule.in_keys)


def _union(rules: Iterable[_Rule]) -> tuple[frozenset[str], tuple[str, ...]]:
    rules = list(rules)
    words = frozenset().union(*(rule.words for rule in rules))
    needles = {needle for rule in rules for needle in rule.needles}
    # A needle that contains a shorter one adds nothing to a gate ("<|" after "<").
    needles = {n for n in needles if not any(o != n and o in n for o in needles)}
    return words, tuple(sorted(needles))


_ALL_GATE: Final = _union((*_RULES, _SENSITIVE_MENTION))
_KEY_GATE: Final = _union(_KEY_RULES)
_TOKEN: Final = re.compile(r"[a-z0-9]+")


# White space and Markdown emphasis, read as one space by the phrase rules: "**do not** tell",
# "do_not_tell". Single-character class, so matching it is linear.
_SEPARATORS: Final = re.compile(r"[\s*_`~#>|\\]+")
# Look-alike letters folded to ASCII before the phrase rules run, so "ignore" spelt with a
# Cyrillic i (U+0456) or in fullwidth letters (folded by NFKC) does not slip through. Matching
# only; hidden-character findings show the text as it was.
_CONFUSABLES: Final = str.maketrans(
    # Cyrillic a e o p c y x i j s d l, Greek o a e i k v p t u, curly quotes.
    "\u0430\u0435\u043e\u0440\u0441\u0443\u0445\u0456\u0458\u0455\u0501\u04cf"
    "\u03bf\u03b1\u03b5\u03b9\u03ba\u03bd\u03c1\u03c4\u03c5"
    "\u2018\u2019\u201c\u201d",
    "aeopcyxijsdloaeikvptu''\"\"",
)


# Phrase results depend only on the text, and tool lists repeat the same property names and
# descriptions many times; short texts are cached (bounded: at most size x length).
_CACHED_TEXT_CHARS: Final = 512


def _normalize(text: str) -> tuple[str, str]:
    """`text` as shown and as matched, head and tail only if it is long.

    Shown: hidden characters removed, white space collapsed. Matched: that, folded (NFKC,
    look-alike letters). Excerpts come from the shown text where the two line up, so an admin
    sees the letters that were actually there.
    """
    limit = PATTERN_SCAN_HEAD_CHARS + PATTERN_SCAN_TAIL_CHARS
    if len(text) > limit:
        text = f"{text[:PATTERN_SCAN_HEAD_CHARS]} … {text[-PATTERN_SCAN_TAIL_CHARS:]}"
    if text.isascii():
        if _ASCII_HIDDEN.search(text):
            text = _ASCII_HIDDEN.sub("", text)
        visible = _WHITESPACE.sub(" ", text)
        return visible, visible
    visible = _WHITESPACE.sub(" ", _hidden_re().sub("", text))
    folded = unicodedata.normalize("NFKC", visible).translate(_CONFUSABLES)
    return visible, folded


def _phrase_hits(text: str, *, key_rules_only: bool = False) -> tuple[_Hit, ...]:
    if len(text) <= _CACHED_TEXT_CHARS:
        return _cached_phrase_hits(text, key_rules_only)
    return _uncached_phrase_hits(text, key_rules_only)


@functools.lru_cache(maxsize=8192)
def _cached_phrase_hits(text: str, key_rules_only: bool) -> tuple[_Hit, ...]:
    return _uncached_phrase_hits(text, key_rules_only)


def _uncached_phrase_hits(text: str, key_rules_only: bool) -> tuple[_Hit, ...]:
    visible, plain = _normalize(text)
    lowered = plain.lower()
    gate_words, gate_needles = _KEY_GATE if key_rules_only else _ALL_GATE
    tokens = set(_TOKEN.findall(lowered))
    if gate_words.isdisjoint(tokens) and not any(needle in lowered for needle in gate_needles):
        return ()  # most strings stop here
    shown = visible if len(visible) == len(plain) else plain
    words = ""
    shifts: tuple[list[int], list[int]] = ([], [])
    hits: list[_Hit] = []
    found_request = False
    for rule in _KEY_RULES if key_rules_only else _RULES:
        if rule.words.isdisjoint(tokens) and not (
            rule.needles and any(needle in lowered for needle in rule.needles)
        ):
            continue
        if rule.requires and not any(needle in lowered for needle in rule.requires):
            continue
        if rule.on_words and not words:
            words = _SEPARATORS.sub(" ", plain)
            shifts = _separator_shifts(plain)
        subject = words if rule.on_words else plain
        found = 0
        for match in rule.regex.finditer(subject):
            found += 1
            if found > _MATCHES_DETAILED:
                continue
            start, end = match.span()
            if rule.on_words:
                start, end = _plain_offset(shifts, start), _plain_offset(shifts, end)
            hits.append(_rule_hit(rule, match, _excerpt(shown, start, end)))
        if found > _MATCHES_DETAILED:
            hits[-1] = dataclasses.replace(hits[-1], count=found - _MATCHES_DETAILED + 1)
        found_request = found_request or (found > 0 and rule.id == "sensitive_file_request")
    mention = _SENSITIVE_MENTION
    if not key_rules_only and not found_request and any(n in lowered for n in mention.needles):
        hits.extend(
            _rule_hit(mention, match, _excerpt(shown, *match.span()))
            for match in mention.regex.finditer(plain)
        )
    return tuple(hits)


def _separator_shifts(plain: str) -> tuple[list[int], list[int]]:
    """Where each separator run of `plain` starts once runs are collapsed, and the characters
    removed up to its end."""
    starts: list[int] = []
    shifts: list[int] = []
    shift = 0
    for separator in _SEPARATORS.finditer(plain):
        starts.append(separator.start() - shift)
        shift += len(separator.group()) - 1
        shifts.append(shift)
    return starts, shifts


def _plain_offset(shifts: tuple[list[int], list[int]], index: int) -> int:
    """Where `index` in the separator-collapsed text lies in the text before collapsing."""
    starts, removed = shifts
    before = bisect.bisect_left(starts, index)
    return index + (removed[before - 1] if before else 0)


def _rule_hit(rule: _Rule, match: re.Match[str], excerpt: str) -> _Hit:
    groups = match.groupdict()
    target = next((value for value in groups.values() if value), match.group())
    label = rule.label.format(target=_truncate(_render(target), 60))
    return _Hit(rule.kind, rule.id, rule.severity, label, excerpt)
