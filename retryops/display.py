"""How the console shows values in its lists."""

from datetime import datetime

from django.utils import timezone
from django.utils.formats import date_format
from django.utils.html import format_html


def short_time(moment: datetime | None) -> str:
    """A time in a list column, as narrow as it can be read: the time alone today, the day and
    time this year, the date before; the full date and time on hover. A list of a dozen columns
    then fits 1366 px without scrolling sideways."""
    if moment is None:
        return "-"
    local, now = timezone.localtime(moment), timezone.localtime()
    if local.date() == now.date():
        shown = local.strftime("%H:%M:%S")
    elif local.year == now.year:
        shown = local.strftime("%m-%d %H:%M")
    else:
        shown = local.strftime("%Y-%m-%d")
    return format_html('<time datetime="{}" title="{}">{}</time>', local.isoformat(),
                       date_format(local, "DATETIME_FORMAT"), shown)
