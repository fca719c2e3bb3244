"""Typed readers for settings that come from the environment (12-factor)."""

import os
import re

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str | None = None) -> str | None:
    """A string setting; `NAME_FILE` (a path) wins, so secrets can come from mounted files."""
    path = os.environ.get(f"{name}_FILE")
    if path:
        try:
            with open(path, encoding="utf-8") as fh:
                return fh.read().strip()
        except OSError as exc:
            raise ImproperlyConfigured(f"{name}_FILE={path!r} cannot be read: {exc}") from exc
    return os.environ.get(name, default)


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}={raw!r} is not a boolean: use one of 1/0, true/false, yes/no, on/off")


def env_int(name: str, default: int, *, minimum: int | None = None, maximum: int | None = None) -> int:
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not an integer") from None
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name}={value} must be at least {minimum}")
    if maximum is not None and value > maximum:
        raise ImproperlyConfigured(f"{name}={value} must be at most {maximum}")
    return value


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


def env_choice(name: str, default: str, choices: tuple[str, ...]) -> str:
    """One of `choices`, matched without regard to case (empty is the default)."""
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    for choice in choices:
        if raw.strip().lower() == choice.lower():
            return choice
    raise ImproperlyConfigured(f"{name}={raw!r} is not one of {', '.join(choices)}")


def env_networks(name: str, default: str) -> list[str]:
    """Comma-separated IP networks in CIDR notation ("10.0.0.0/8, ::1"; a bare address is one
    host), checked and written canonically; a network with host bits set (10.0.0.5/8) is refused
    as the typo it usually is."""
    import ipaddress

    raw = os.environ.get(name)
    networks = []
    for item in (default if raw is None else raw).split(","):
        if not item.strip():
            continue
        try:
            networks.append(str(ipaddress.ip_network(item.strip())))
        except ValueError as exc:
            raise ImproperlyConfigured(f"{name}: {item.strip()!r} is not an IP network such as 10.0.0.0/8 or ::1 "
                                       f"({exc})") from None
    return networks


_HEADER_NAME = re.compile(r"[A-Za-z0-9-]+")


def env_header_value(name: str) -> tuple[str, str] | None:
    """A request header and the value it must have, written "X-Forwarded-Proto: https", as
    Django's (META key, value) pair: ("HTTP_X_FORWARDED_PROTO", "https"). Unset or empty: None."""
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return None
    header, colon, value = raw.partition(":")
    header, value = header.strip(), value.strip()
    if not colon or not _HEADER_NAME.fullmatch(header) or not value or not value.isprintable():
        raise ImproperlyConfigured(f"{name}={raw!r} is not a header and its value such as "
                                   "'X-Forwarded-Proto: https'")
    return "HTTP_" + header.upper().replace("-", "_"), value


def env_addresses(name: str) -> list[tuple[str, int]]:
    """Comma-separated host:port pairs ("10.0.0.5:26379, sentinel-b:26379, [::1]:26379"); unset
    or empty: none."""
    raw = os.environ.get(name)
    addresses = []
    for item in (raw or "").split(","):
        item = item.strip()
        if not item:
            continue
        host, colon, port = item.rpartition(":")
        bracketed = host.startswith("[") and host.endswith("]")
        host = host[1:-1] if bracketed else host
        if (not colon or not host or not (port.isascii() and port.isdigit()) or not 0 < int(port) < 65536
                or (":" in host and not bracketed) or any(c.isspace() or c in "/@[]" for c in host)):
            raise ImproperlyConfigured(f"{name}: {item!r} is not a host:port such as sentinel-a:26379 "
                                       "(an IPv6 address in brackets: [::1]:26379)")
        addresses.append((host, int(port)))
    return addresses


# The PostgreSQL schemes dj_database_url maps to Django's postgresql backend.
POSTGRES_SCHEMES = ("postgresql", "postgres", "pgsql")
REDIS_SCHEMES = ("redis", "rediss", "unix")


_RESERVED_IN_USER_INFO = ("the user info (before '@') contains '/', '?' or '#': percent-encode them in the password "
                          "(%2F, %3F, %23)")


def _user_info_holds_reserved(url: str) -> bool:
    """Whether an @ follows the first /, ? or # after the scheme: an unencoded one of those in a
    password ends the host part early (for urlsplit as for libpq and redis-py), so the rest of the
    password and the real host land in the path, query or fragment."""
    rest = url.partition("://")[2]
    cut = re.search(r"[/?#]", rest)
    return cut is not None and "@" in rest[cut.start():]


def _url_parts(name: str, url: str, *, schemes: tuple[str, ...], example: str, path_may_hold_at: bool = False):
    """`url` split, once it has one of `schemes` and a usable port. Messages never repeat the
    URL itself, nor anything from its user info: it may carry a password. `path_may_hold_at`: an
    @ after the host is an ordinary character (a web page's path, a socket's file path), so only a
    port that fails to parse is blamed on the user info."""
    from urllib.parse import urlsplit

    if any(not ch.isprintable() or ch.isspace() for ch in url):
        raise ImproperlyConfigured(f"{name} contains a space or a control character; a URL has none "
                                   f"(%-encode them in a password), such as {example}")
    scheme, sep, _ = url.partition("://")
    if not sep or not re.fullmatch(r"[A-Za-z][A-Za-z0-9+.-]*", scheme):
        raise ImproperlyConfigured(f"{name} is not a URL: it must start with "
                                   f"{' or '.join(s + '://' for s in schemes)}, such as {example}")
    if scheme.lower() not in schemes:
        raise ImproperlyConfigured(f"{name} must start with {' or '.join(s + '://' for s in schemes)}, "
                                   f"not {scheme}:// (such as {example})")
    if not path_may_hold_at and _user_info_holds_reserved(url):
        raise ImproperlyConfigured(f"{name}: {_RESERVED_IN_USER_INFO}")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - urlsplit checks the port only when it is read
    except ValueError as exc:
        if "IPv6" in str(exc):  # urlsplit's "Invalid IPv6 URL": a [ or ] without its other half
            port = re.search(r"@?HOST(:\d+)", example)
            raise ImproperlyConfigured(f"{name} has a host with an unclosed [ (an IPv6 address goes in brackets, "
                                       f"as in [::1]{port.group(1) if port else ''})") from None
        if _user_info_holds_reserved(url):  # the "port" urlsplit read is the password's start
            raise ImproperlyConfigured(f"{name} has a port that is not a number from 1 to 65535, or "
                                       f"{_RESERVED_IN_USER_INFO}") from None
        host_and_port = re.split(r"[/?#]", url.partition("://")[2], maxsplit=1)[0].rpartition("@")[2]
        port = host_and_port.rpartition("]")[2].rpartition(":")[2]
        raise ImproperlyConfigured(f"{name} has port {port!r}, which is not a number from 1 to 65535 "
                                   f"(such as {example})") from None
    if parts.port == 0:
        raise ImproperlyConfigured(f"{name} has port 0, which is not a number from 1 to 65535 (such as {example})")
    return parts


def check_database_url(url: str, *, name: str = "DATABASE_URL") -> str:
    """`url` when it is one PostgreSQL can be reached by (a host may be missing: the local socket);
    else ImproperlyConfigured naming `name` and what is wrong."""
    example = "postgresql://USER:PASSWORD@HOST:5432/retryops"
    parts = _url_parts(name, url, schemes=POSTGRES_SCHEMES, example=example)
    if not parts.path.strip("/"):
        raise ImproperlyConfigured(f"{name} names no database: put its name after the host, as in {example}")
    return url


def check_redis_url(url: str, *, name: str = "REDIS_URL") -> str:
    """`url` when redis-py can connect with it (redis://, rediss:// with a host, unix:// with a
    socket path; a database number when one is given); else ImproperlyConfigured naming `name`."""
    example = "redis://HOST:6379/0"
    # A unix socket's path is a file's: it may hold an @.
    parts = _url_parts(name, url, schemes=REDIS_SCHEMES, example=example,
                       path_may_hold_at=url.partition("://")[0].lower() == "unix")
    if parts.scheme.lower() == "unix":
        if not parts.path:
            raise ImproperlyConfigured(f"{name} names no socket: unix:// must be followed by the socket's path, "
                                       "as in unix:///run/redis/redis.sock")
        return url
    if not parts.hostname:
        raise ImproperlyConfigured(f"{name} names no host, as in {example}")
    database = parts.path.strip("/")
    if database and not (database.isascii() and database.isdigit()):
        raise ImproperlyConfigured(f"{name} has database {database!r} after the host: it must be a number such as 0 "
                                   f"(as in {example})")
    from redis.connection import parse_url

    try:
        parse_url(url)  # the query's options (?db=, ?socket_timeout=...), as redis-py reads them
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name}: {exc}") from None
    return url


def check_http_url(url: str, *, name: str) -> str:
    """`url` when it is an http:// or https:// URL with a host and a usable port."""
    example = "https://HOST/PATH"
    parts = _url_parts(name, url, schemes=("http", "https"), example=example, path_may_hold_at=True)
    if not parts.hostname:
        raise ImproperlyConfigured(f"{name} names no host, as in {example}")
    return url
