"""The parts the `scheduler` CLI's API commands share: reading definition files, talking to the
API through `schedulerclient`, and rendering plans, tables, JSON and YAML."""
