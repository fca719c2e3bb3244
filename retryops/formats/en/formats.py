# Django's English formats show "Dec. 2, 2026, 7:37 p.m."; a two-minute backoff needs the seconds.
DATETIME_FORMAT = "N j, Y, H:i:s"
TIME_FORMAT = "H:i:s"
SHORT_DATETIME_FORMAT = "m/d/Y H:i:s"
