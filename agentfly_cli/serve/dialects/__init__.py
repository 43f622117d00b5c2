"""The APIs the gateway speaks besides chat completions, each converted to and from one."""
