"""Work orders: what an operator has to compensate and its SLA clocks (models), opened and moved
through their transitions (services), and their page in the console (admin, admin_filters)."""
