"""Running answers: what a chat asks for and returns, the Engine that plans and streams them, and the two
ways to run it elsewhere (a child process for answers on a worker, one thread the window and the API share)."""
