"""The CodeExec environment family: tasks, action language, sandbox, env."""
