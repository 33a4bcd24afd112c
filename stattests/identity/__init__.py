"""Identity testing against a known law p: the proven row every certificate's guarantee rests on.

``instance``     the instance-optimal test (heaviest token, light tail, weighted chi-square
                 middle; the empirical TV on wide laws) and its worst-case detectable TV
``subsets``      the empirical TV with every subset's binomial law (small supports)
``tail_bounds``  the proven upper bound on the middle statistic's null tail
``lower_bound``  the certified lower bound on the draws any identity test needs

A floor between the core and the rooms: it imports the core's statistics; the chain, tree
and server rooms import it; the core never does.
"""
