"""The scenarios, one module each, in the order a full run takes them (--only picks by name)."""
