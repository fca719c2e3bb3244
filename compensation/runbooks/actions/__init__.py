"""Built-in runbook actions: callables(ActionContext) -> JSON-able result, named by dotted path in
a runbook's front matter. Each does its work through the services, so every change it makes is
checked and audited like an operator's own."""
