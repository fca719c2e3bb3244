# Django's Simplified Chinese formats stop at the minute ("2026年12月2日 19:37").
DATETIME_FORMAT = "Y年n月j日 H:i:s"
TIME_FORMAT = "H:i:s"
SHORT_DATETIME_FORMAT = "Y年n月j日 H:i:s"
