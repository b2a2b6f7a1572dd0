"""sweep.driver: the Ray Tune driver: a sweep's checks, its Ray, the trainable and its callbacks."""
