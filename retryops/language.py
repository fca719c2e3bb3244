"""The language of what the system writes down, as opposed to what it shows."""

import functools

from django.utils import translation


def in_stored_language(job):
    """Run an RQ job with translations off. Services say their errors in the active language, and
    a job stores what they say: an attempt's error, its signature (which runbooks and work orders
    match on), a task's last error. A worker has no request to take a language from and would
    otherwise speak LANGUAGE_CODE, so a zh-hans deployment would store Chinese errors beside
    English ones and split one failure into two signatures. The console translates at display."""

    @functools.wraps(job)
    def in_english(*args, **kwargs):
        with translation.override(None):
            return job(*args, **kwargs)

    return in_english
