//! The egress proxy at the socket level, played by an attacker: see host/src/egress.
