"""Queue triggers: consume messages from a broker and create one instance per message."""
