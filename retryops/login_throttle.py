"""The console's sign-in throttle (django-axes): after AXES_FAILURE_LIMIT wrong passwords
for one username from one address, that username is refused from that address for
AXES_COOLOFF_TIME (settings), even with the right password; other users and other addresses
sign in as before. Axes keeps the failures in PostgreSQL (axes_accessattempt), so every web
process and host counts the same ones; `manage.py axes_reset_username NAME` lifts a lock early."""

import math

from django.conf import settings
from django.contrib import admin
from django.shortcuts import render
from django.utils.translation import gettext, ngettext
from rest_framework.throttling import BaseThrottle


def client_address(request) -> str:
    """The address a sign-in came from, read as the API's throttle and /metrics read it
    (RETRYOPS_API_NUM_PROXIES proxies trusted): an X-Forwarded-For a client wrote itself would
    otherwise give it a fresh address, and a fresh count, at every try."""
    return (BaseThrottle().get_ident(request) or "").strip()


def locked_out(request, original_response=None, credentials=None):
    """The page a locked sign-in gets, in the operator's language: 429, saying for how long."""
    minutes = max(1, math.ceil(settings.AXES_COOLOFF_TIME.total_seconds() / 60))
    message = ngettext(
        "Too many failed sign-ins for this username from your address. Signing in is locked for %(minutes)d "
        "minute; try again then, or ask an administrator to unlock it.",
        "Too many failed sign-ins for this username from your address. Signing in is locked for %(minutes)d "
        "minutes; try again then, or ask an administrator to unlock it.", minutes) % {"minutes": minutes}
    context = {**admin.site.each_context(request), "title": gettext("Signing in is locked"), "message": message}
    return render(request, "admin/locked_out.html", context, status=429)
