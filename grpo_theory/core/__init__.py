"""The engine every claim uses: policies -> sampling -> estimators -> exact / Monte Carlo MSE ->
U-statistics -> scaling-law constants."""
