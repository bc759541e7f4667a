"""Scale-out: worker processes running local actors, and several daemons sharing one PostgreSQL."""
