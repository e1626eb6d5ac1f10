"""vmsched-router: the cell router, one API in front of several vmsched installations (cells)."""
