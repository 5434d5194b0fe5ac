print("parley-node")
