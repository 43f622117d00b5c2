"""Bridges to the field's environment libraries (reasoning-gym, HumanEval, textarena, BFCL,
OpenEnv, verifiers): each module is a plugin, registered through its own ``agentfly`` entry
point, whose library is an optional extra (``pip install 'agentfly-cli[NAME]'``)."""
