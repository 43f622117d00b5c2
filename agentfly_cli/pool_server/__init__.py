"""The pool server behind ``agentfly env up``: one warm env pool of a registered env, served
over a socket, and the library that starts, lists and stops such servers."""
