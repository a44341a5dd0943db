"""Adapters that put nano_respo's policy loss inside distributed RL engines.

Each engine lives in its own module and is imported only on demand, so the core package
never needs TRL or verl installed:

    from nano_respo.integrations.trl import ReSPOGRPOTrainer   # TRL's GRPOTrainer, ReSPO loss
    import nano_respo.integrations.verl                         # registers loss_mode=respo in verl

Install their dependencies with `pip install -r nano_respo/integrations/requirements.txt` (see
nano_respo/integrations/README.md).
"""
