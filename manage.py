#!/usr/bin/env python
"""Django's command-line utility for RetryOps."""

import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "retryops.settings")
    from django.core.management import execute_from_command_line

    from retryops.startup import read_settings_or_exit

    read_settings_or_exit()
    execute_from_command_line(sys.argv)
