"""Date formats for the admin (FORMAT_MODULE_PATH): Django's own, with seconds, because backoffs
and leases are counted in seconds and operators compare times to them."""
