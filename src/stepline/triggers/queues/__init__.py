"""Queue triggers: consume messages from a broker and create one instance per message."""

from .broker import Broker, BrokerError, Message, open_broker
from .config import QueueTrigger
from .consumer import Consumer

__all__ = ["Broker", "BrokerError", "Consumer", "Message", "QueueTrigger", "open_broker"]
