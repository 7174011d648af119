"""SQL storage for the scheduler: tables, engine, migrations, repositories, unit of work."""
