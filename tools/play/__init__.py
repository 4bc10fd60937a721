"""appo-play: watch and steer a policy, in the browser (viser) or MuJoCo's own viewer, from a checkpoint or live."""
