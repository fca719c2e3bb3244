"""Secrets in the JSON that flows get (a resource's attributes, a task's payload) and in what
flows, clients and services write beside it (results, timeline details, audit entries) shown as
a mask wherever they leave the system for people or other systems: the console, the API, the
audit log and its stream, the logs. The flows themselves get the real values.

A key is secret when SECRET_KEYS (a regex, searched case-insensitively in the key) finds it; the
whole value under such a key is masked, whatever its type, at any depth. Every layer
uses this one module (it sits beside retryops.jsonsafe, below audit), so there is one rule.

Free text has no keys: an upstream's error that echoes the request carries the password in its
message. scrub_secret_values replaces the values themselves (secret_values: those of an
attempt's payload and resource attributes) in such text before it is stored or logged."""

import functools
import json
import re
from collections.abc import Iterable

from django.utils.translation import gettext

from retryops.errors import BadInput

MASK = "******"
# password/passwd/pwd, passphrase, any *token*, *secret*, *cookie* (Set-Cookie too), api_key, api-key,
# apikey, x-api-key, authorization, private_key, privatekey, credentials. No \b around pwd: an
# underscore is a word character, so \bpwd\b missed db_pwd and user_pwd.
SECRET_KEYS = re.compile(r"passw(or)?d|passphrase|pwd|token|secret|cookie|api[-_]?key|authori[sz]ation|private[-_]?key"
                         r"|credential", re.IGNORECASE)


def mask_log_secrets(logger, method_name: str, event_dict: dict) -> dict:
    """A structlog processor: a log line's keys (`extra={...}`, bound context) masked like the rest."""
    return mask_secrets(event_dict)


def mask_secrets(value):
    """A copy of `value` (JSON: dicts, lists, scalars) with the value under every secret key,
    at any depth, replaced by MASK. Anything else is returned as it is; the input is not changed."""
    secret = SECRET_KEYS
    try:
        return _masked(value, secret)
    except RecursionError:  # nested too deeply to look through: nothing of it is shown
        return MASK


# Keys up to this long have their verdict remembered: a log line's keys (every request's access
# line has a dozen) and most JSON's are a few names seen again and again, and the regex was half
# the cost of writing a line. A longer key is searched each time, so no client can fill the memory.
_REMEMBERED_KEY_LENGTH = 64


@functools.lru_cache(maxsize=4096)
def _remembered_secret_key(key: str) -> bool:
    return SECRET_KEYS.search(key) is not None


def _is_secret_key(key, secret: re.Pattern) -> bool:
    if not isinstance(key, str):
        return False
    if secret is SECRET_KEYS and len(key) <= _REMEMBERED_KEY_LENGTH:
        return _remembered_secret_key(key)
    return secret.search(key) is not None


def _masked(value, secret: re.Pattern):
    if isinstance(value, dict):
        return {key: MASK if _is_secret_key(key, secret) else _masked(item, secret) for key, item in value.items()}
    if isinstance(value, list):
        return [_masked(item, secret) for item in value]
    if isinstance(value, tuple):  # a log line's exc_info stays a tuple
        return tuple(_masked(item, secret) for item in value)
    return value


# A shorter value ("on", "123") would mask the same characters wherever they stand in a message.
MIN_SECRET_LENGTH = 4


def secret_values(*values) -> list[str]:
    """The secrets in `values` (JSON) as they may appear in free text: each string of at least
    MIN_SECRET_LENGTH characters and each number of at least as many digits (as str() writes
    it) under a secret key, at any depth, also as JSON escapes it (a request body echoed back
    quotes a password's " and \\ and non-ASCII characters so); longest first."""
    secret, found = SECRET_KEYS, set()
    # A stack, not recursion: a payload may nest deeper than Python's recursion limit.
    stack = [(value, False) for value in values]
    while stack:
        value, under_secret = stack.pop()
        if isinstance(value, dict):
            stack.extend((item, under_secret or (isinstance(key, str) and secret.search(key) is not None))
                         for key, item in value.items())
        elif isinstance(value, (list, tuple)):
            stack.extend((item, under_secret) for item in value)
        elif under_secret and isinstance(value, str) and len(value) >= MIN_SECRET_LENGTH:
            found |= {value, json.dumps(value)[1:-1]}
        elif under_secret and isinstance(value, (int, float)) and not isinstance(value, bool):
            if sum(character.isdigit() for character in str(value)) >= MIN_SECRET_LENGTH:
                found.add(str(value))
    return sorted(found, key=len, reverse=True)


# A secret cut off at the end of a text is masked only from this many characters on: whether a
# text was cut cannot be known from it, and a shorter beginning ("pass" of "password123") ends
# ordinary words too ("invalid password").
MIN_CUT_LENGTH = 8
# A secret that is a number (str() of an int or float) is masked only as a whole number: 1000 is
# not the beginning of 10000.
_NUMBER = re.compile(r"-?\d+(\.\d+)?([eE][-+]?\d+)?")


def scrub_secret_values(text: str, secrets: Iterable[str]) -> str:
    """`text` with every occurrence of each of `secrets` (secret_values) replaced by MASK (a number
    only where it stands as a whole number), and a secret's beginning of MIN_CUT_LENGTH characters
    or more at the very end of the text too (a message that quotes an upstream's answer cut to so
    many bytes may end in the middle of one), within the text's last word only."""
    secrets = list(secrets)
    if not secrets or not text:
        return text
    # One at a time, the longer first (a secret inside a longer one leaves nothing of it), and a
    # string by str.replace: compiling a megabyte-long secret into a pattern took two seconds.
    for value in sorted({value for value in secrets if value in text}, key=lambda value: (-len(value), value)):
        text = re.sub(rf"(?<!\d){re.escape(value)}(?!\d)", MASK, text) if _NUMBER.fullmatch(value) \
            else text.replace(value, MASK)
    cut = max((_cut_length(text, value) for value in secrets), default=0)
    return text[:-cut] + MASK if cut else text


def _cut_length(text: str, value: str) -> int:
    """The length of the longest beginning of `value`, shorter than it and of at least
    MIN_CUT_LENGTH characters, that the text's last word ends with; 0 if none. Only beginnings
    ending in the word's last MIN_CUT_LENGTH characters are compared, so a megabyte-long secret
    costs a search, not a slice for every length."""
    if len(text) < MIN_CUT_LENGTH or text[-1].isspace():
        return 0
    word = text.rsplit(None, 1)[-1]
    needle = word[-MIN_CUT_LENGTH:]
    end = min(len(value) - 1, len(word))
    while len(needle) == MIN_CUT_LENGTH and (found := value.rfind(needle, 0, end)) >= 0:
        length = found + MIN_CUT_LENGTH
        if word.endswith(value[:length]):
            return length
        end = length - 1
    return 0


def keep_masked_secrets(submitted, stored, *, field: str, error: type[BadInput] = BadInput):
    """`submitted` with each MASK under a secret key replaced by the stored value at the same
    place (in a list: in the same entry, see _sources): a page or a client that sends back what it
    was shown (masked) keeps the real secret, and a value typed over the mask replaces it. A mask
    with no secret stored at its place (a key renamed while it showed the mask, a new key given
    the mask) is refused with `error` (the caller's app's BadInput, code masked_secret_unknown)
    naming its path under `field`: stored, the mask would be what the flows use as the secret."""
    try:
        return _kept(submitted, stored, SECRET_KEYS, field)
    except _UnknownMask as exc:
        path = exc.args[0]
        raise error(gettext("%(path)s shows the mask %(mask)s but no secret is stored for it: type the secret") % {
            "path": path, "mask": MASK}, field=field, path=path, code="masked_secret_unknown") from None


class _UnknownMask(Exception):
    """A mask with no stored secret behind it; args: its path."""


def _kept(submitted, stored, secret: re.Pattern, path: str):
    if isinstance(submitted, dict):
        before = stored if isinstance(stored, dict) else {}
        kept = {}
        for key, value in submitted.items():
            if isinstance(key, str) and secret.search(key) and value == MASK:
                if key not in before:
                    raise _UnknownMask(f"{path}.{key}")
                kept[key] = before[key]
            else:
                kept[key] = _kept(value, before.get(key), secret, f"{path}.{key}")
        return kept
    if isinstance(submitted, list):
        before = stored if isinstance(stored, list) else []
        return [_kept(value, source, secret, f"{path}[{n}]")
                for n, (value, source) in enumerate(zip(submitted, _sources(submitted, before, secret)))]
    return submitted


def _sources(submitted: list, before: list, secret: re.Pattern) -> list:
    """For each entry of a list sent back, the stored entry its masks stand for: the one that was
    shown exactly so (entries removed, added or moved keep their own secrets; by position alone,
    removing the first of two accounts gave the second the first one's password), else, for an
    entry edited beside its mask, when the list kept its length, the stored entries no other entry
    was matched to, in order (by place alone, an entry edited after a move got the moved one's);
    else none."""
    shown = [_masked(entry, secret) for entry in before]
    unused = list(range(len(before)))
    sources = []
    for value in submitted:
        match = next((i for i in unused if shown[i] == value), None)
        if match is not None:
            unused.remove(match)
        sources.append(match)
    if len(before) == len(submitted):  # then as many entries are unmatched as stored entries unused
        leftover = iter(unused)
        sources = [match if match is not None else next(leftover) for match in sources]
    return [before[match] if match is not None else None for match in sources]
