"""The course builder: multi-stage generation runs executed by the builder queue."""
