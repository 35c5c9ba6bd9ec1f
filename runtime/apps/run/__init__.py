"""Running one configuration from a command: the run facade, its flags, report, trace and exit."""
