"""RL algorithms: the estimator and loss interfaces, advantage estimators, policy losses, turn
credit, the value head.
"""
