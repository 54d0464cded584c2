"""Motion references for the skills: human motion import, authored seeds, retargeting, acceptance checks, library."""
