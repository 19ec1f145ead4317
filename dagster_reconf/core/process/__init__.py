"""What starts drivers and talks to them: the driver's main, the control endpoint (server and client), the
supervisor, process trees, and the loopback standalone cluster."""
